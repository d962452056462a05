#!/bin/sh
# per_rank_pocl_cache.sh - runs one MPI rank with a PoCL kernel cache directory of its own, then
# execs the rest of its arguments. PoCL's on-disk kernel cache is not safe for several processes
# building at once (PoCL 3.1, Debian 12: a rank's clBuildProgram fails at random with
# CL_BUILD_PROGRAM_FAILURE while the others build the same program), and every rank of a ring test
# builds the same kernels at the same moment. The rank comes from the launcher's environment
# (Open MPI, MPICH/Hydra or PMIx); without one, or without POCL_CACHE_DIR, nothing changes.
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-}}}
if [ -n "${POCL_CACHE_DIR:-}" ] && [ -n "$rank" ]; then
  POCL_CACHE_DIR="$POCL_CACHE_DIR/rank-$rank"
  export POCL_CACHE_DIR
fi
exec "$@"
