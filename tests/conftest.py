import jax

jax.config.update("jax_enable_x64", True)
# No persistent compilation cache: writing some executables to it crashed the interpreter
# (abort in compilation_cache.put_executable_and_time, segfault in compile_and_write_cache) when
# the whole suite ran on a cold cache.
