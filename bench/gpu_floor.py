"""The floor of one local-SGD step of K MLP clients (64-64-10, batch 10) on a GPU: hand-written batched
forward/backward with bmm, eager and replayed from a CUDA graph (8 steps per graph = one digits round).

Copied from the shared probe ``../shared/probes/gpu_floor.py`` (issue #33's floor table): the same
model, data, step and timing; its loop over K became :func:`floor` (so that ``bench/gpu_round.py`` times
the floor beside the simulator in one process), with ``--ks`` and a ``__main__`` guard.
``../shared`` does not travel to a GPU machine; this copy does.

    python bench/gpu_floor.py [--ks 5 320 1280 5120]
"""
import argparse, sys, time, torch
dev = torch.device("cuda") if torch.cuda.is_available() else None

def make(K, B=10, D=64, H=64, C=10):
    g = torch.Generator(device=dev).manual_seed(0)
    P = [torch.randn(K, D, H, device=dev, generator=g) * .1, torch.zeros(K, 1, H, device=dev),
         torch.randn(K, H, C, device=dev, generator=g) * .1, torch.zeros(K, 1, C, device=dev)]
    X = torch.randn(8, K, B, D, device=dev, generator=g); Y = torch.randint(0, C, (8, K, B), device=dev, generator=g)
    return P, X, Y

def step(P, X, Y, lr=0.05):
    W1, b1, W2, b2 = P
    h = torch.baddbmm(b1, X, W1); a = h.relu(); z = torch.baddbmm(b2, a, W2)
    g = z.softmax(-1); g.scatter_add_(-1, Y.unsqueeze(-1), -torch.ones(Y.shape + (1,), device=dev)); g /= X.shape[1]
    gW2 = a.transpose(1, 2) @ g; gb2 = g.sum(1, keepdim=True)
    dh = (g @ W2.transpose(1, 2)) * (h > 0)
    gW1 = X.transpose(1, 2) @ dh; gb1 = dh.sum(1, keepdim=True)
    W1.sub_(lr * gW1); b1.sub_(lr * gb1); W2.sub_(lr * gW2); b2.sub_(lr * gb2)

def round_(P, X, Y):
    for s in range(8):
        step(P, X[s], Y[s])

def floor(K, n=20):
    """(eager, graph) seconds of one 8-step round of K clients."""
    P, X, Y = make(K)
    for _ in range(3): round_(P, X, Y)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): round_(P, X, Y)
    torch.cuda.synchronize(); eager = (time.perf_counter() - t) / n
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): round_(P, X, Y)
    torch.cuda.current_stream().wait_stream(s)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        round_(P, X, Y)
    for _ in range(3): gr.replay()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): gr.replay()
    torch.cuda.synchronize(); graph = (time.perf_counter() - t) / n
    del P, X, Y, gr; torch.cuda.empty_cache()
    return eager, graph

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[5, 64, 320, 1280, 5120, 20480, 81920])
    args = ap.parse_args()
    if dev is None:
        sys.exit("gpu_floor: no CUDA GPU here (torch.cuda.is_available() is False)")
    for K in args.ks:
        eager, graph = floor(K)
        print(f"floor K={K:6d}  round eager {eager*1e3:8.3f} ms ({eager/(8*K)*1e6:8.3f} us/client-step)  "
              f"graph {graph*1e3:8.3f} ms ({graph/(8*K)*1e6:8.4f} us/client-step)", flush=True)
