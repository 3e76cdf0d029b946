# A machine module with real providers, for trying captf locally: hashicorp/time stamps the
# machine's creation into its provider ID and hashicorp/local reads the machine image for the
# Machine's Kubernetes version from images.json, as a cloud module looks up its VM image. Nothing
# boots: the "machine" is a terraform_data resource. The module image carries both providers in
# its mirror (/captf/providers) and .terraform.lock.hcl pins their hashes (`make module-lock`).

terraform {
  required_providers {
    time = {
      source  = "hashicorp/time"
      version = "0.14.2"
    }
    local = {
      source  = "hashicorp/local"
      version = "1.4.0"
    }
  }
}

# Every sample variable the other sample module takes, so a template may name either module.
variable "name" {
  type    = string
  default = null
}

variable "size" {
  type    = string
  default = "small"
}

data "local_file" "images" {
  filename = "${path.module}/images.json"
}

locals {
  images = jsondecode(data.local_file.images.content)
  image  = lookup(local.images, coalesce(var.kubernetes_version, "default"), local.images["default"])
}

# Created once per machine: a new machine (a replacement) gets a new time and so a new provider
# ID, as a cloud gives a new instance a new ID.
resource "time_static" "created" {
  triggers = { machine = var.machine_name }
}

resource "terraform_data" "instance" {
  input = {
    name      = var.machine_name
    image     = local.image
    size      = var.size
    bootstrap = sha256(var.bootstrap_data)
    tags      = var.captf_tags
  }
}

output "health" {
  value = { state = "running", healthy = true, message = "booted ${local.image} at ${time_static.created.rfc3339}", reasons = [] }
}

output "provider_id" {
  value = "local://${var.machine_name}-${time_static.created.unix}"
}

output "addresses" {
  value = [{ type = "Hostname", address = "${var.machine_name}.local" }]
}

output "failure_domain" {
  value = var.failure_domain
}

output "interruptible" {
  value = false
}
