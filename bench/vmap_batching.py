"""Does batching K clients with torch.func.vmap beat K separate steps? One CNN training step, measured.

Compares one vmapped grad step of K = 10 clients (batch 10 each) of the 21.8k-parameter
``fedmgda_cnn`` with 10 plain ``nn.Module`` + ``torch.optim.SGD`` steps at batch 10, on random data,
one torch thread. Run it twice to see the allocator's effect:

    OMP_NUM_THREADS=1 python bench/vmap_batching.py
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 OMP_NUM_THREADS=1 python bench/vmap_batching.py
"""
import time, torch, torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from fedsel_env.sim.models import make_model, init_params
torch.set_num_threads(1)
m = make_model("fedmgda_cnn", (1,28,28), 10)
p1 = init_params(m, torch.Generator().manual_seed(0))
K,B=10,10
p = {n: t.unsqueeze(0).repeat(K,*[1]*t.dim()) for n,t in p1.items()}
x = torch.randn(K,B,1,28,28); y = torch.randint(0,10,(K,B)); mask=torch.ones(K,B)
def loss(pr, x, y, mk):
    return (F.cross_entropy(functional_call(m, pr, (x,)), y, reduction='none')*mk).sum()/mk.sum()
g = vmap(grad(loss))
for _ in range(5): g(p,x,y,mask)
t=time.perf_counter()
for _ in range(60): g(p,x,y,mask)
v=(time.perf_counter()-t)/60*1e3
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(20): opt.zero_grad(); F.cross_entropy(m(x[i%K]),y[i%K]).backward(); opt.step()
t=time.perf_counter()
for i in range(300):
    opt.zero_grad(); F.cross_entropy(m(x[i%K]),y[i%K]).backward(); opt.step()
s=(time.perf_counter()-t)/300*1e3
print(f"vmapped K=10 step {v:.1f} ms | 10 single steps {10*s:.1f} ms | batching gain {10*s/v:.2f}x")
