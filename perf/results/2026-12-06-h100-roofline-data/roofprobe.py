# Device-to-device copy of 1 GiB with different contents: does the copy's speed depend on the data?
import torch, sys
n = 1 << 30
def make(kind):
    if kind == "empty": return torch.empty(n, dtype=torch.uint8, device="cuda")
    if kind == "zeros": return torch.zeros(n, dtype=torch.uint8, device="cuda")
    if kind == "ones": return torch.full((n,), 255, dtype=torch.uint8, device="cuda")
    if kind == "randbytes": return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
    if kind == "randbf16": return torch.randn(n // 2, dtype=torch.bfloat16, device="cuda").view(torch.uint8)
    if kind == "ints": return (torch.arange(n // 4, dtype=torch.int32, device="cuda") % 97 - 48).to(torch.bfloat16).repeat(2)[: n // 2].view(torch.uint8)
def tbps(x, y, reps=20):
    for _ in range(3): y.copy_(x)
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps): y.copy_(x)
    b.record(); torch.cuda.synchronize()
    return 2 * n / (a.elapsed_time(b) / reps / 1e3) / 1e12
kinds = ["empty", "zeros", "ones", "randbytes", "randbf16", "ints"]
res = {k: [] for k in kinds}
for r in range(4):
    for k in kinds:
        x = make(k); y = torch.empty_like(x)
        res[k].append(tbps(x, y))
        del x, y; torch.cuda.empty_cache()
print(torch.cuda.get_device_name())
for k in kinds:
    v = res[k]; print(f"{k:10s} " + " ".join(f"{t:.3f}" for t in v) + f"  best {max(v):.3f}")
