# This file is maintained automatically by "tofu init".
# Manual edits may be lost in future updates.

provider "registry.opentofu.org/hashicorp/local" {
  version     = "1.4.0"
  constraints = "1.4.0"
  hashes = [
    "h1:Riac8PUFtcX3uknX+hCvk6pFOPKt5Hrq2dQsWyKwaCM=",
  ]
}

provider "registry.opentofu.org/hashicorp/time" {
  version     = "0.14.2"
  constraints = "0.14.2"
  hashes = [
    "h1:vvPubUBPWCbZXJtqdbnNm5a/8OS7OJ0IWwFlMHx0M1c=",
  ]
}
