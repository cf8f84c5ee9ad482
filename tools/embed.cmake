# embed.cmake: cmake -DIN=file -DOUT=file.c -DNAME=sym -P embed.cmake writes file's bytes as
# `const char NAME[]` (NUL-terminated) and `const size_t NAME_len` (used for the web chat page).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT} "/* generated from ${IN} by tools/embed.cmake */\n#include <stddef.h>\nconst char ${NAME}[] = {${bytes} 0};\nconst size_t ${NAME}_len = ${len};\n")
