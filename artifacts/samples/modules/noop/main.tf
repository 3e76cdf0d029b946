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

# The outputs of every Cluster API role, so one module serves a TerraformCluster, a
# TerraformMachine and a TerraformMachinePool: each role reads its own and ignores the others.
# Null is allowed where the contract says what null means (docs/module-contract.md).

output "health" {
  value = { state = "running", healthy = true, message = null, reasons = [] }
}

# TerraformCluster.
output "control_plane_endpoint" {
  value = { host = "${var.name}.local", port = 6443 }
}

output "failure_domains" {
  value = [{ name = "local-a", control_plane = true, attributes = {} }]
}

output "exports" {
  value = { network = terraform_data.network.id }
}

# TerraformMachine (and the pool's optional group ID): named after the Machine when there is one,
# so the machines a MachineDeployment makes from one template differ.
locals {
  node = coalesce(var.machine_name, var.name)
}

output "provider_id" {
  value = "local://${local.node}"
}

output "addresses" {
  value = [{ type = "Hostname", address = "${local.node}.local" }]
}

# Placed where the Machine asks (null when it asks for none): a module that reports another
# failure domain is not provisioned (FailureDomainMismatch).
output "failure_domain" {
  value = var.failure_domain
}

output "interruptible" {
  value = false
}

# TerraformMachinePool: an instance per replica the MachinePool asks for.
locals {
  pool_ids = [for i in range(coalesce(var.replicas, 1)) : "local://${var.name}-${i}"]
}

output "provider_id_list" {
  value = local.pool_ids
}

output "replicas" {
  value = length(local.pool_ids)
}

output "instances" {
  value = [for id in local.pool_ids : { provider_id = id, state = "running" }]
}
