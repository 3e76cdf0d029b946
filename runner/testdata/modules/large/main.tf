# A module whose state is larger than one Secret holds: each blob is 180 SHA-512 digests,
# base64, which gzip compresses little. 140 blobs make about 2.2 MB of state JSON and 1.7 MB of
# gzip, above the 1 MiB a Secret's data may hold.

variable "blobs" {
  type    = number
  default = 140
}

variable "salt" {
  type    = string
  default = "a"
}

resource "terraform_data" "blob" {
  count = var.blobs
  input = join("", [for j in range(180) : base64sha512("${var.salt}-${count.index}-${j}")])
}

output "blobs" {
  value = length(terraform_data.blob)
}
