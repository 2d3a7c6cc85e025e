# The script ik_llama.cpp's build runs to write common/build-info.cpp; the ik-llama-cpp-python 0.1.5 sdist lacks
# it (Makefile: $(VENV)/.ik-native puts this file in its place). The strings only name the build in
# llama-quantize's output; the libraries codespec loads do not use them.
set(BUILD_NUMBER 0)
set(BUILD_COMMIT "ik-llama-cpp-python-0.1.5-sdist")
set(BUILD_COMPILER "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")
set(BUILD_TARGET "native")
configure_file("${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp.in" "${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp" @ONLY)
