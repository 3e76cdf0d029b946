# An apply that takes long: a provisioner needs no provider download and runs until stopped. It
# leaves provisioner-started in the work directory (the parent of the root module copy) first,
# so a test knows when to stop it without reading the log, which withholds apply progress.

variable "name" {
  type = string
}

resource "terraform_data" "slow" {
  input = var.name

  provisioner "local-exec" {
    command = "touch ../provisioner-started && sleep 300"
  }
}
