"""Which kernels torch's scaled_dot_product_attention runs, and the launches to profile with Nsight Compute:

    python3 benchmarks/sdpa_kernels.py names     # the CUDA kernels of SDPA in float32 (causal and not), float16
    ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
        --section Occupancy -k regex:"fmha|flash|cutlass" --launch-skip 1 --launch-count 1 \
        python3 benchmarks/sdpa_kernels.py sdpa32   # torch's float32 attention kernel
    ncu ... -k regex:pipelined --launch-count 2 python3 benchmarks/sdpa_kernels.py pipe   # attention.pipelined,
                                                                                   # not causal, then causal
    ncu ... -k regex:"split_keys|merge|flash" python3 benchmarks/sdpa_kernels.py decode   # float16 decoding at
        # 1 x 32 x 1 x 8192 x 128: split_keys_f16's two launches, then SDPA's flash backend on the same inputs

At 8 x 16 x 4096^2 x 128 (benchmarks/NOTES.md, attention: what the float32 peer is).
"""
import os
import sys

os.environ.setdefault("GPUKERNELS_DEVICE", "gpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from numba import cuda  # noqa: E402

from gpukernels import attention as at  # noqa: E402

what = sys.argv[1]
shape = (1, 32, 1, 8192, 128) if what == "decode" else (8, 16, 4096, 4096, 128)
b, h, sq, sk, d = shape
q, k, v = at.make_inputs(shape, seed=7)
if what == "names":
    from torch.profiler import profile, ProfilerActivity
    for dt, causal in ((torch.float32, False), (torch.float32, True), (torch.float16, False)):
        t = [torch.from_numpy(x).to(dt).cuda() for x in (q, k, v)]
        F.scaled_dot_product_attention(*t, is_causal=causal); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            F.scaled_dot_product_attention(*t, is_causal=causal); torch.cuda.synchronize()
        for e in prof.key_averages():
            if e.device_time_total > 0:
                print(dt, causal, e.key[:150], round(e.device_time_total / 1e3, 3), "ms")
    print("allow_tf32 matmul", torch.backends.cuda.matmul.allow_tf32, "cudnn", torch.backends.cudnn.allow_tf32,
          "precision", torch.get_float32_matmul_precision())
elif what == "sdpa32":
    t = [torch.from_numpy(x).cuda() for x in (q, k, v)]
    for _ in range(2):
        F.scaled_dot_product_attention(*t)
    torch.cuda.synchronize()
elif what == "pipe":
    t = [torch.from_numpy(x.astype(np.float16)).cuda() for x in (q, k, v)]
    for causal in (False, True):
        out = torch.empty((b, h, sq, d), device="cuda")
        for launch in at.pipelined.launches(*(cuda.as_cuda_array(x) for x in t), out=cuda.as_cuda_array(out),
                                            causal=causal):
            launch()
        cuda.synchronize()
elif what == "decode":
    from torch.nn.attention import SDPBackend, sdpa_kernel
    t = [torch.from_numpy(x.astype(np.float16)).cuda() for x in (q, k, v)]
    out = torch.empty((b, h, sq, d), device="cuda")
    for launch in at.split_keys_f16.launches(*(cuda.as_cuda_array(x) for x in t), out=cuda.as_cuda_array(out)):
        launch()
    cuda.synchronize()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(*t)
    torch.cuda.synchronize()

