# Rewrites the relative imports of a generated *_ops_gen.py so that it can
# live outside the mlir.dialects package.
file(READ "${IN}" _text)
string(REPLACE "from ._ods_common" "from mlir.dialects._ods_common" _text "${_text}")
string(REPLACE "from .._ods_common" "from mlir.dialects._ods_common" _text "${_text}")
file(WRITE "${OUT}" "${_text}")
