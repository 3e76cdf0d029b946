# The inputs captf gives a machine module (docs/module-contract.md): every role's, then the
# machine role's. This module serves the machine role only.

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
  type = any
}

variable "bootstrap_data" {
  type      = string
  sensitive = true
}

variable "bootstrap_format" {
  type = string
}

variable "kubernetes_version" {
  type = string
}

variable "machine_name" {
  type = string
}

variable "failure_domain" {
  type = string
}

variable "control_plane" {
  type = bool
}
