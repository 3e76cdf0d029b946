# Prints its sensitive input where OpenTofu does not mask it (nonsensitive() in a local-exec
# command, whose output goes into the error: its second line starts an "Error:" line of its own)
# and fails: in the apply when fail_apply is set, and whenever it is destroyed. name shows in
# the plan body.

variable "name" {
  type = string
}

variable "secret" {
  type      = string
  sensitive = true
}

variable "fail_apply" {
  type    = bool
  default = false
}

resource "terraform_data" "named" {
  input = var.name
}

resource "terraform_data" "held" {
  input = var.secret

  provisioner "local-exec" {
    when    = destroy
    command = "printf 'echo\\nError: destroying with %s\\n' '${nonsensitive(self.input)}' >&2; exit 1"
  }
}

resource "terraform_data" "failing" {
  count = var.fail_apply ? 1 : 0

  provisioner "local-exec" {
    command = "printf 'echo\\nError: applying with %s\\n' '${nonsensitive(var.secret)}' >&2; exit 1"
  }
}
