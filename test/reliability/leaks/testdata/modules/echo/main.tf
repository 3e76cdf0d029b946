# A machine module that fails and says why with the machine's sensitive inputs in its error,
# through paths OpenTofu does not mask: nonsensitive() in a local-exec command, and a variable of
# the environment the identity lends the run. Its apply always fails; destroying what the apply
# created fails too. The second line of each message starts an "Error:" line of its own, so it
# reaches the run's error tail as well as the log.

variable "size" {
  type      = string
  default   = null
  sensitive = true
}

resource "terraform_data" "held" {
  input = { data = var.bootstrap_data, size = var.size }

  provisioner "local-exec" {
    when    = destroy
    command = "printf 'echo\\nError: destroying with %s, %s and %s\\n' '${nonsensitive(self.input.data)}' '${nonsensitive(self.input.size)}' \"$CLOUD_TOKEN\" >&2; exit 1"
  }
}

resource "terraform_data" "failing" {
  depends_on = [terraform_data.held]

  provisioner "local-exec" {
    command = "printf 'echo\\nError: applying with %s, %s and %s\\n' '${nonsensitive(var.bootstrap_data)}' '${nonsensitive(var.size)}' \"$CLOUD_TOKEN\" >&2; exit 1"
  }
}
