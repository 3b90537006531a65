import os

import jax

jax.config.update("jax_enable_x64", True)
# Compiled programs persist between runs of the suite (compile time dominates it).
jax.config.update(
    "jax_compilation_cache_dir",
    os.environ.get("LOOPDYN_JAX_CACHE", os.path.expanduser("~/.cache/loopdyn/jax")),
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
