# The inputs captf gives a module (docs/module-contract.md). A module declares every input of its
# role; this one serves all three roles, so each input has a default for the roles that do not
# pass it.

variable "captf_contract" {
  type = string
}

variable "captf_cluster" {
  type = any
}

variable "captf_object" {
  type = any
}

variable "captf_tags" {
  type = map(string)
}

variable "captf_cluster_outputs" {
  type    = any
  default = null
}

# The cluster role.

variable "control_plane_endpoint" {
  type    = object({ host = string, port = number })
  default = null
}

variable "control_plane_initialized" {
  type    = bool
  default = false
}

variable "cluster_network" {
  type    = any
  default = null
}

# The machine and machine pool roles.

variable "kubernetes_version" {
  type    = string
  default = null
}

variable "bootstrap_data" {
  type      = string
  default   = null
  sensitive = true
}

variable "bootstrap_format" {
  type    = string
  default = null
}

variable "machine_name" {
  type    = string
  default = null
}

variable "failure_domain" {
  type    = string
  default = null
}

variable "control_plane" {
  type    = bool
  default = false
}

variable "machinepool_name" {
  type    = string
  default = null
}

variable "replicas" {
  type    = number
  default = 1
}

variable "failure_domains" {
  type    = list(string)
  default = []
}

variable "cluster_failure_domains" {
  type    = list(string)
  default = []
}

variable "node_labels" {
  type    = map(string)
  default = {}
}

variable "autoscaling" {
  type    = any
  default = null
}
