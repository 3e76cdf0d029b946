# A module of built-in terraform_data resources only, so no provider is downloaded.

variable "name" {
  type = string
}

variable "extra" {
  type    = string
  default = ""
}

# Changing generation replaces terraform_data.this.
variable "generation" {
  type    = number
  default = 1
}

variable "items" {
  type    = number
  default = 0
}

resource "terraform_data" "this" {
  input            = { name = var.name, extra = var.extra }
  triggers_replace = [var.generation]
}

resource "terraform_data" "item" {
  count = var.items
  input = "item-${count.index}"
}

output "id" {
  value = terraform_data.this.id
}

output "name" {
  value = var.name
}
