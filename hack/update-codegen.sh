#!/usr/bin/env bash
# Regenerates every generated file: CRDs and deepcopy of the infrastructure API (controller-gen),
# and deepcopy, conversion, defaults and OpenAPI of the runs API (code-generator, openapi-gen).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${CAPTF_BIN_DIR:-$root/bin}
header=hack/boilerplate.go.txt

"$bin/controller-gen" object:headerFile="$header" paths=./apis/infrastructure/...
"$bin/controller-gen" crd paths=./apis/infrastructure/... output:crd:artifacts:config=artifacts/crd

if [ -d apis/runs ]; then
  # The internal hub (apis/runs) and v1alpha1 get deepcopy; v1alpha1 gets conversions to the hub
  # and defaulters. OpenAPI definitions cover v1alpha1 and the apimachinery types it references,
  # named by model name (io.captf.runs.v1alpha1.Run, from +k8s:openapi-model-package) so that the
  # server's definition namer tags them with their group, version and kind; API-rule violations
  # are written to a committed report, so a new one shows up as a diff.
  "$bin/deepcopy-gen" --go-header-file "$header" --output-file zz_generated.deepcopy.go ./apis/runs ./apis/runs/v1alpha1
  "$bin/conversion-gen" --go-header-file "$header" --output-file zz_generated.conversion.go ./apis/runs/v1alpha1
  "$bin/defaulter-gen" --go-header-file "$header" --output-file zz_generated.defaults.go ./apis/runs/v1alpha1
  "$bin/openapi-gen" --go-header-file "$header" --output-dir apis/runs/openapi --output-pkg github.com/captf/captf/apis/runs/openapi \
    --output-file zz_generated.openapi.go --output-model-name-file zz_generated.model_name.go \
    --readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 --readonly-pkg k8s.io/apimachinery/pkg/runtime \
    --readonly-pkg k8s.io/apimachinery/pkg/version \
    --report-filename apis/runs/openapi/api-rule-violations.list \
    k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version \
    ./apis/runs/v1alpha1
fi
