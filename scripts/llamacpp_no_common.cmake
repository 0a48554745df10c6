# llama-cpp-python forces LLAMA_BUILD_COMMON=ON in its cache, but its Python package loads
# only libllama/libggml; a normal variable shadows the forced cache entry (CMP0126).
set(LLAMA_BUILD_COMMON OFF)
