#!/usr/bin/env bash
# Stands in for `pdserve prefill|decode` where the binary lacks them: runs `pdserve serve`
# with the flags serve knows, so `pdserve up` and deploy_pd.sh can be tested end to end
# before the real roles land. Everything else goes to the real binary (PDSERVE_REAL).
set -euo pipefail
real=${PDSERVE_REAL:?PDSERVE_REAL must name the real pdserve binary}
role=$1
shift
case $role in
  prefill | decode)
    args=()
    while (($#)); do
      case $1 in
        --bootstrap-port | --tp | --allow-prefill) shift 2 ;;
        *)
          args+=("$1")
          shift
          ;;
      esac
    done
    exec "$real" serve "${args[@]}"
    ;;
  *) exec "$real" "$role" "$@" ;;
esac
