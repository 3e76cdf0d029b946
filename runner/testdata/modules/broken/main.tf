# Refers to a variable it does not declare, so validate fails.

variable "name" {
  type = string
}

resource "terraform_data" "this" {
  input = var.undeclared
}
