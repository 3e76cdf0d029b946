# A test module whose applies can fail part-way, whose destroys can take long and whose state can
# outgrow one Secret, with built-in resources only.

variable "name" {
  type = string
}

# Adds a resource whose creation, with fail, fails after the plan, leaving it tainted.
variable "extra" {
  type    = bool
  default = false
}

variable "fail" {
  type    = bool
  default = false
}

# Seconds destroying the slow resource takes, so a test can interrupt the apply that removes it.
variable "destroy_sleep" {
  type    = number
  default = 0
}

# Blobs of SHA-512 digests, which gzip compresses little: 140 make a state of about 1.7 MB of
# gzip, above the 1 MiB a Secret holds, and it does not compress at all once encrypted.
variable "blobs" {
  type    = number
  default = 0
}

resource "terraform_data" "blob" {
  count = var.blobs
  input = join("", [for j in range(180) : base64sha512("${var.name}-${count.index}-${j}")])
}

resource "terraform_data" "base" {
  input = var.name
}

# Created with the extra resource when destroy_sleep is set, and created cleanly: OpenTofu runs no
# destroy-time provisioner of a tainted resource, so the slow destroy cannot sit on extra itself.
resource "terraform_data" "slow" {
  count = var.extra && var.destroy_sleep > 0 ? 1 : 0
  input = { destroy_sleep = var.destroy_sleep }

  provisioner "local-exec" {
    when = destroy
    # By its path: the module image carries no sleep of its own, and the test's node runs the
    # provisioner's shell from the machine it runs on.
    command = "/bin/sleep ${self.input.destroy_sleep}"
  }
}

resource "terraform_data" "extra" {
  count      = var.extra ? 1 : 0
  depends_on = [terraform_data.slow]

  provisioner "local-exec" {
    command = var.fail ? "echo the extra resource was asked to fail >&2; exit 1" : "true"
  }
}

output "provider_id" {
  value = "local://${var.name}"
}
