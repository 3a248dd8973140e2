# Where the CPU build of torch comes from (sourced by .ci/install and .ci/lock): the wheel this
# machine kind keeps on disk, else PyTorch's CPU index. Never the multi-GB CUDA build.
torch_source=()
if compgen -G "/opt/wheels/torch-2.13.0+cpu-*.whl" >/dev/null; then
  torch_source=(--find-links /opt/wheels)
else
  torch_source=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
fi
