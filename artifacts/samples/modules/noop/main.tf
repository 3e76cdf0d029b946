# A no-op infrastructure module for trying captf locally: built-in terraform_data only, so no
# provider is downloaded. Its outputs follow the CAPI contract names.

variable "name" {
  type = string
}

variable "size" {
  type    = string
  default = "small"
}

# Set fail to true to make the apply fail, for trying retries and backoff.
variable "fail" {
  type    = bool
  default = false
}

# Changing generation replaces the resource, for trying the destructive-plan guard.
variable "generation" {
  type    = number
  default = 1
}

resource "terraform_data" "network" {
  input            = { name = var.name, size = var.size }
  triggers_replace = [var.generation]

  lifecycle {
    precondition {
      condition     = !var.fail
      error_message = "the sample module was asked to fail (fail = true)."
    }
  }
}

output "control_plane_endpoint" {
  value = { host = "${var.name}.local", port = 6443 }
}

output "provider_id" {
  value = "local://${var.name}"
}
