# The list of tests (kept apart from the helper function in CMakeLists.txt).
ulysses_add_test(test_dtype SOURCES test_dtype.cpp LABELS unit)
