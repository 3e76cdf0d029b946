# An apply that takes long: a provisioner needs no provider download and runs until stopped.

variable "name" {
  type = string
}

resource "terraform_data" "slow" {
  input = var.name

  provisioner "local-exec" {
    command = "sleep 300"
  }
}
