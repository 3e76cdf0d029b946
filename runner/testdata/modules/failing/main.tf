# Valid, but its apply fails.

variable "name" {
  type = string
}

resource "terraform_data" "this" {
  input = var.name

  provisioner "local-exec" {
    command = "echo 'provisioner output' >&2; exit 3"
  }
}
