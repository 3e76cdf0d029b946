# A test module whose applies can fail part-way and whose destroys can take long, with built-in
# resources only.

variable "name" {
  type = string
}

# Adds a resource whose creation, with fail, fails after the plan, leaving it tainted.
variable "extra" {
  type    = bool
  default = false
}

variable "fail" {
  type    = bool
  default = false
}

# Seconds destroying the extra resource takes, so a test can interrupt that apply.
variable "destroy_sleep" {
  type    = number
  default = 0
}

resource "terraform_data" "base" {
  input = var.name
}

resource "terraform_data" "extra" {
  count = var.extra ? 1 : 0
  input = { destroy_sleep = var.destroy_sleep }

  provisioner "local-exec" {
    command = var.fail ? "echo the extra resource was asked to fail >&2; exit 1" : "true"
  }

  provisioner "local-exec" {
    when    = destroy
    command = "sleep ${self.input.destroy_sleep}"
  }
}

output "provider_id" {
  value = "local://${var.name}"
}
