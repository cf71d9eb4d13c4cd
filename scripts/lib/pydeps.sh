# Python packages the fixture scripts need, installed once from PyPI (sourced by
# scripts/fetch-fixtures and scripts/make-grown-3b; $who names the caller in messages).
need_gguf() {
  if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("gguf"))' 2>/dev/null)" != 0.19.0 ]; then
    echo "$who: installing gguf==0.19.0 (PyPI)"
    python3 -m pip install --quiet --disable-pip-version-check gguf==0.19.0
  fi
}
need_llama_cpp() {
  if ! python3 -c 'import llama_cpp, sys; sys.exit(llama_cpp.__version__ != "0.3.36")' 2>/dev/null; then
    echo "$who: building llama-cpp-python==0.3.36 from PyPI (llama.cpp from source, once)"
    # Only the library is needed: no multimodal helper, no examples or tests.
    CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF}" \
      python3 -m pip install --quiet --disable-pip-version-check llama-cpp-python==0.3.36
  fi
}
