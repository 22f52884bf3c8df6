#!/bin/bash
# Compile cost of a downstream program's one unit (no precompiled header), -O1, CPU seconds and peak memory.
base="-DBOOST_ALL_NO_LIB -DLIBREYOLO_HAVE_CAIRO=1 -DLIBREYOLO_WITH_RE2=1 -DUSE_C10D_GLOO -DUSE_DISTRIBUTED -isystem /usr/include/torch/csrc/api/include -isystem /usr/include/cairo -isystem /usr/include/glib-2.0 -isystem /usr/lib/x86_64-linux-gnu/glib-2.0/include -isystem /usr/include/pixman-1 -isystem /usr/include/freetype2 -isystem /usr/include/libpng16 -O1 -DNDEBUG -D_GLIBCXX_USE_CXX11_ABI=1 -std=c++20"
m() { # name include-dir extra-defs source
  /usr/bin/time -f "$1 user=%U sys=%S wall=%e maxrss_kb=%M rc=%x" g++ $base -I$2 $3 -c $4 -o /tmp/cm_$1.o 2>&1 | grep -E "user=|error" | head -3
}
m before_facade_headeronly /work/cm/before_include "" facade.cpp
m after_facade_components /work/wt/s19/include "-DLIBREYOLO_COMPILED_LIB -DLIBREYOLO_COMPILED_FAMILIES" facade.cpp
m after_trainer_headeronly /work/wt/s19/include "" trainer.cpp
m before_trainer_headeronly /work/cm/before_include "" trainer.cpp
