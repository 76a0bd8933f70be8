# ddptui telemetry sampler: $1 pgid of the run, $2 heartbeat timeout (s),
# $3 lines per segment, $4 the run's marker prefix, $5 a PATH or ''; run in the node dir.
pgid=$1; beat_timeout=$2; seg_lines=$3; marker=$4
[ -n "$5" ] && PATH=$5 && export PATH
echo $$ > __PID__
: > __OUT0__; : > __OUT1__
gpu_fields=__GPU_FIELDS__
smi=; command -v nvidia-smi >/dev/null 2>&1 && smi=1

gpus() {
  printf '@gpu %s\n' "$gpu_fields"
  while :; do
    nvidia-smi --query-gpu="$gpu_fields" --format=csv,noheader,nounits -l 1 2>&1 |
      while IFS= read -r l; do printf 'G %s\n' "$l"; done
    printf '@gpu-ended\n'
    sleep 5
  done
}

apps() {
  printf 'P@\n'
  nvidia-smi --query-compute-apps=__APP_FIELDS__ --format=csv,noheader,nounits 2>&1 |
    while IFS= read -r l; do
      rest=${l#*, }; pid=${rest%%,*}; tag=-
      case $pid in
        *[!0-9]*|'') tag=? ;;
        *) tr '\000' '\n' < /proc/$pid/environ 2>/dev/null | grep -qF "$marker" && tag=+ ;;
      esac
      printf 'P%s %s\n' "$tag" "$l"
    done
  printf 'P.\n'
}

proc() {
  read up idle < /proc/uptime
  printf '@epoch %s %s\n' "$(date +%s)" "$up"
  beat=; beat_at=${up%.*}; n=0
  while :; do
    read up idle < /proc/uptime
    now=${up%.*}
    printf 'T %s\n' "$up"
    read l < /proc/stat; printf 'C %s\n' "$l"
    read l < /proc/loadavg; printf 'L %s\n' "$l"
    while read k v u; do
      case $k in MemTotal:|MemAvailable:) printf 'M %s %s\n' "$k" "$v" ;; esac
    done < /proc/meminfo
    { read l; read l; while read l; do printf 'N %s\n' "$l"; done; } < /proc/net/dev
    [ -n "$smi" ] && [ $((n % __APPS_EVERY__)) -eq 0 ] && apps
    printf 'E\n'
    b=; [ -r __BEAT__ ] && read b < __BEAT__
    [ "$b" != "$beat" ] && { beat=$b; beat_at=$now; }
    if [ $((now - beat_at)) -gt "$beat_timeout" ]; then
      printf '@bye no heartbeat from ddptui for %ss\n' "$beat_timeout"; break
    fi
    if [ "$pgid" -gt 0 ] && ! kill -0 -"$pgid" 2>/dev/null; then
      printf "@bye the run's processes are gone\n"; break
    fi
    n=$((n + 1))
    sleep 1
  done
  sleep 1  # the writer takes the last lines before the group goes
  rm -f __PID__; kill 0
}

writer() {
  seg=0; n=0
  exec 3>> __OUT0__
  while IFS= read -r l; do
    printf '%s\n' "$l" >&3
    n=$((n + 1))
    if [ "$n" -ge "$seg_lines" ]; then
      seg=$(( (seg + 1) % 2 )); n=0
      : > "__OUT_PRE__${seg}__OUT_SUF__"
      printf '@next\n' >&3
      exec 3>> "__OUT_PRE__${seg}__OUT_SUF__"
    fi
  done
}

main() {
  if [ -n "$smi" ]; then gpus & else printf '@gpu-none\n'; fi
  proc
}

trap 'trap - TERM INT HUP; rm -f __PID__; kill 0' TERM INT HUP
main | writer &
wait
