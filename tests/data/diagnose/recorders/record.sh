#!/bin/bash
# Records torchrun output the way ddptui launches it (prefix template, --tee 3, LOGLEVEL=INFO).
cd /tmp/diagrec
export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[ddptui ${rank} ${local_rank}] '
export LOGLEVEL=INFO PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/diagrec OMP_NUM_THREADS=1
run() { name=$1; shift; timeout 60 python3 -m torch.distributed.run "$@" > out/$name.log 2>&1; echo "$name rc=$?"; }
mkdir -p out
run value-error --standalone --nproc-per-node 2 --tee 3 --log-dir /tmp/diagrec/tl value_error.py
run hang-metrics --standalone --nproc-per-node 2 --tee 3 --log-dir /tmp/diagrec/tl hang_metrics.py
run hang-rank0-only --standalone --nproc-per-node 3 --tee 3 --log-dir /tmp/diagrec/tl hang_rank0_only.py
run missing-module --standalone --nproc-per-node 2 --tee 3 --log-dir /tmp/diagrec/tl missing_module.py
run sigkill --standalone --nproc-per-node 2 --tee 3 --log-dir /tmp/diagrec/tl sigkill.py
run segfault --standalone --nproc-per-node 2 --tee 3 --log-dir /tmp/diagrec/tl segfault.py
run missing-script --standalone --nproc-per-node 2 --tee 3 --log-dir /tmp/diagrec/tl /tmp/diagrec/no_such_train.py
# rendezvous: two nodes expected, one started
run rdzv-timeout --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29611 --rdzv-id rt --rdzv-conf join_timeout=8 --tee 3 --log-dir /tmp/diagrec/tl value_error.py
# port taken: something already listens on the master port
python3 -c "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 29612)); s.listen(); time.sleep(40)" &
L=$!; sleep 1
run addr-in-use --nnodes 1 --node-rank 0 --nproc-per-node 2 --rdzv-backend static --master-addr 127.0.0.1 --master-port 29612 --tee 3 --log-dir /tmp/diagrec/tl value_error.py
kill $L
timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 2 --tee 3 --log-dir /tmp/diagrec/tl hang_ahead.py > out/hang-metrics-ahead.log 2>&1; echo "ahead rc=$?"
# 2026-11-25, through ddptui's tee (its agent says when a rank ends with exit code 0):
# python -c "from ddptui.launch.staging import torchrun_program; open('torchrun_tee.py','wb').write(torchrun_program())"
tee() { name=$1; shift; timeout 60 python3 torchrun_tee.py --standalone --tee 3 --log-dir /tmp/diagrec/tl "$@" > out/$name.log 2>&1; echo "$name rc=$?"; }
tee early-exit --nproc-per-node 3 early_exit.py
TORCH_DISTRIBUTED_DEBUG=DETAIL tee mismatch-op --nproc-per-node 2 mismatch.py
TORCH_DISTRIBUTED_DEBUG=DETAIL tee mismatch-shape --nproc-per-node 2 mismatch_shape.py
tee sigabrt --nproc-per-node 2 sigabrt.py
rm -rf data; tee missing-data --nproc-per-node 2 missing_data.py
# 2026-11-27, the same tee, no TORCH_DISTRIBUTED_DEBUG, under /tmp/diagrec-h1:
tee mismatch-size --nproc-per-node 4 mismatch_size.py
