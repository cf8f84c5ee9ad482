"""test_deploy.py: deploy/'s Kubernetes manifests and systemd unit, checked structurally and
against the server itself:
- every manifest parses (python3-yaml) and has its required fields; the Service, the
  PodDisruptionBudget and the Ingress select / name what the Deployment defines;
- the container's arguments are accepted by `bitspark serve`: they are run (the tiny pair in
  place of the model files, loopback, one thread) and the probes' paths answer 200 on the port
  the arguments name, which is also the containerPort the probes and the Service point to;
- terminationGracePeriodSeconds covers preStop + --drain-timeout, the unit's TimeoutStopSec
  covers --drain-timeout;
- the memory request is at least what the model files and slots need, computed from the tensor
  table of the model the manifest names (`bitspark synth --preset bonsai-27b --dry-run`: the
  file sizes, the KV cache per token and the recurrent state), the limit at least that plus the
  saved prompt states at full context (deploy/README.md, "Sizing")."""
import os, re, signal, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_lib import B, SKIP, SRC, TINY, Replica, check, finish, request, workdir

try:
    import yaml
except ImportError:
    print('SKIP: python3-yaml is not installed (tools/deps.sh test installs it)')
    sys.exit(SKIP)
if not B:
    print('BITSPARK is not set')
    sys.exit(1)
D = os.path.join(SRC, 'deploy')
docs = {}
for f in sorted(os.listdir(os.path.join(D, 'kubernetes'))):
    if f.endswith('.yaml'):
        try:
            for doc in yaml.safe_load_all(open(os.path.join(D, 'kubernetes', f))):
                if doc:
                    docs.setdefault(doc.get('kind'), []).append((f, doc))
            check(True, f'kubernetes/{f} parses')
        except yaml.YAMLError as e:
            check(False, f'kubernetes/{f} parses', str(e))


def one(kind):
    d = docs.get(kind) or []
    check(len(d) == 1, f'one {kind}', str([f for f, _ in d]))
    return d[0][1] if d else {}


def get(d, path, default=None):
    for k in path.split('.'):
        if isinstance(d, list) and k.isdigit() and int(k) < len(d):
            d = d[int(k)]
        elif isinstance(d, dict) and k in d:
            d = d[k]
        else:
            return default
    return d


dep, svc, pdb = one('Deployment'), one('Service'), one('PodDisruptionBudget')
ing = (docs.get('Ingress') or [(None, None)])[0][1]
check(dep.get('apiVersion') == 'apps/v1' and svc.get('apiVersion') == 'v1' and pdb.get('apiVersion') == 'policy/v1',
      'API versions: apps/v1, v1, policy/v1')
labels = get(dep, 'spec.template.metadata.labels', {})
sel = get(dep, 'spec.selector.matchLabels', {})
check(sel and all(labels.get(k) == v for k, v in sel.items()), 'Deployment: its selector matches its pod labels')
check((get(dep, 'spec.replicas') or 0) >= 2, 'Deployment: several replicas')
c = get(dep, 'spec.template.spec.containers.0', {})
cmd = (c.get('command') or []) + (c.get('args') or [])
check(len(cmd) > 2 and cmd[0].endswith('bitspark') and cmd[1] == 'serve', 'container runs bitspark serve', str(cmd[:3]))
args = cmd[2:]


def flag(*names, default=None):
    for i, a in enumerate(args[:-1]):
        if a in names:
            return args[i + 1]
    return default


port = int(flag('--port', default='8080'))
drain = float(flag('--drain-timeout', default='30'))
np_, ctx = int(flag('-np', '--parallel', default='1')), int(flag('-c', '--ctx', default='4096'))
check(flag('--host') == '0.0.0.0', 'serve listens on every address (--host 0.0.0.0): probes come from the node')
ports = {p.get('name'): p.get('containerPort') for p in c.get('ports') or []}
check(port in ports.values(), f'containerPort {port} is the --port of the arguments', str(ports))


def probe_port(p):
    v = get(p, 'httpGet.port')
    return ports.get(v) if isinstance(v, str) else v


probes = {k: c.get(k) for k in ('startupProbe', 'livenessProbe', 'readinessProbe')}
check(all(probes.values()), 'startup, liveness and readiness probes', str(list(probes)))
for k, p in probes.items():
    if p:
        check(probe_port(p) == port, f'{k}: port {get(p, "httpGet.port")} is {port}')
check(get(probes['livenessProbe'], 'httpGet.path') in ('/health', '/v1/health') and
      get(probes['startupProbe'], 'httpGet.path') in ('/health', '/v1/health'),
      'liveness and startup probe GET /health (503 while loading, 200 while alive, draining too)')
rp = get(probes['readinessProbe'], 'httpGet.path', '')
check(rp in ('/ready', '/v1/ready', '/health?ready'), f'readiness probe GET {rp} (503 when loading, draining or full)')
pre = get(c, 'lifecycle.preStop.exec.command') or []
pre_s = float(pre[-1]) if pre and re.fullmatch(r'\d+(\.\d+)?', str(pre[-1])) else float(get(c, 'lifecycle.preStop.sleep.seconds', 0))
grace = get(dep, 'spec.template.spec.terminationGracePeriodSeconds', 30)
check(grace >= pre_s + drain + 5, f'terminationGracePeriodSeconds {grace} >= preStop {pre_s:g} + --drain-timeout {drain:g} + 5')
env = {e.get('name'): e for e in c.get('env') or []}
rid = flag('--replica-id', default='')
check(rid == '$(POD_NAME)' and get(env.get('POD_NAME'), 'valueFrom.fieldRef.fieldPath') == 'metadata.name',
      '--replica-id is the pod name (downward API)')

# the Service, the PDB and the Ingress point at the Deployment's pods and port
check(svc.get('spec', {}).get('selector') and all(labels.get(k) == v for k, v in svc['spec']['selector'].items()),
      'Service selects the pods')
sp = get(svc, 'spec.ports.0', {})
tp = sp.get('targetPort')
check((ports.get(tp) if isinstance(tp, str) else tp) == port, f'Service targetPort {tp} is container port {port}')
psel = get(pdb, 'spec.selector.matchLabels', {})
check(psel and all(labels.get(k) == v for k, v in psel.items()), 'PodDisruptionBudget selects the pods')
mu, ma = get(pdb, 'spec.maxUnavailable'), get(pdb, 'spec.minAvailable')
check((mu is not None and 0 < int(mu) < dep['spec']['replicas']) or (ma is not None and int(ma) < dep['spec']['replicas']),
      'PodDisruptionBudget leaves room to drain one replica, never all')
if ing:
    be = get(ing, 'spec.rules.0.http.paths.0.backend.service', {})
    bp = get(be, 'port.name') or get(be, 'port.number')
    check(be.get('name') == get(svc, 'metadata.name') and bp in (sp.get('name'), sp.get('port')),
          f'Ingress backend is the Service ({be.get("name")}:{bp})')
    check('$http_x_session_id' in get(ing, 'metadata.annotations', {}).get('nginx.ingress.kubernetes.io/upstream-hash-by', ''),
          'Ingress hashes on X-Session-Id')

# ---- sizing: from the tensor table of the model the manifest names --------------------------------
QTY = {'Ki': 2 ** 10, 'Mi': 2 ** 20, 'Gi': 2 ** 30, 'Ti': 2 ** 40, 'k': 1e3, 'M': 1e6, 'G': 1e9, '': 1}


def qty(s):
    m = re.fullmatch(r'(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|)', str(s))
    return float(m.group(1)) * QTY[m.group(2)] if m else None


def table(preset):
    out = subprocess.run([B, 'synth', '--preset', preset, '--dry-run'], capture_output=True, text=True, check=True).stdout
    rows = [ln.split('\t') for ln in out.splitlines() if '\t' in ln]
    total = int(re.search(r'# tensors \d+ bytes (\d+)', out).group(1))
    return {r[0]: [int(x) for x in r[2].split(',')] for r in rows}, total


PRESETS = {'Bonsai-27B-Q1_0.gguf': 'bonsai-27b', 'Bonsai-27B-dspark.gguf': 'drafter-bonsai-27b'}
model, drafter = os.path.basename(flag('-m', default='')), os.path.basename(flag('-md', default=''))
if check(model in PRESETS and (not drafter or drafter in PRESETS), f'the manifest names a known model ({model}, {drafter})'):
    t, model_bytes = table(PRESETS[model])
    drafter_bytes = table(PRESETS[drafter])[1] if drafter else 0
    att = [k for k in t if k.endswith('.attn_k.weight')]
    rec = [k for k in t if k.endswith('.ssm_a')]
    kv_token = sum(2 * t[k][1] * 2 for k in att)                     # K and V rows, f16
    b0 = rec[0].split('.')[1]
    conv = t[f'blk.{b0}.ssm_conv1d.weight']
    hd = t[f'blk.{b0}.ssm_norm.weight'][0]
    state = len(rec) * 4 * (t[rec[0]][0] * hd * hd + (conv[0] - 1) * conv[1])   # f32 DeltaNet + conv state
    need = model_bytes + drafter_bytes + np_ * (ctx * kv_token + 4 * state)
    worst = need + np_ * 2 * ctx * kv_token
    req, lim = qty(get(c, 'resources.requests.memory')), qty(get(c, 'resources.limits.memory'))
    G = 2 ** 30
    check(req is not None and req >= need, f'memory request {get(c, "resources.requests.memory")} >= {need / G:.2f} GiB '
          f'(files {(model_bytes + drafter_bytes) / G:.2f} GiB, {np_} slots x ({ctx} x {kv_token >> 10} KiB KV + '
          f'4 x {state / 2 ** 20:.0f} MiB state))')
    check(lim is not None and lim >= worst, f'memory limit {get(c, "resources.limits.memory")} >= {worst / G:.2f} GiB '
          f'(+ saved prompt states at full context)')
    threads = int(flag('-t', '--threads', default='0'))
    check(threads and qty(get(c, 'resources.requests.cpu')) == threads, f'cpu request = -t {threads}')

# ---- the arguments run: the tiny pair in place of the files, loopback, one thread -------------------
W = workdir('deploy')
run = []
skip_next = False
for i, a in enumerate(args):
    if skip_next:
        skip_next = False
        continue
    v = args[i + 1] if i + 1 < len(args) else None
    repl = {'-m': TINY, '-md': os.path.join(SRC, 'models', 'bonsai-tiny-dspark.gguf'), '--host': '127.0.0.1',
            '-t': '1', '--port': None, '--replica-id': 'pod-0'}
    if a in repl:
        skip_next = True
        if repl[a] is not None:
            run += [a, repl[a]]
    else:
        run.append(a)
r = Replica(W, 'manifest', run)
try:
    r.start().wait_ready()
    for k, p in probes.items():
        st, h, _ = request(r.port, 'GET', get(p, 'httpGet.path'))
        check(st == 200 and h.get('x-replica-id') == 'pod-0', f'{k} GET {get(p, "httpGet.path")}: 200 from the '
              'manifest\'s arguments (tiny pair)', f'{st}')
except RuntimeError as e:
    check(False, 'bitspark serve takes the manifest\'s arguments', str(e)[-800:])
r.stop()

# ---- the systemd unit ------------------------------------------------------------------------------
unit = open(os.path.join(D, 'systemd', 'bitspark@.service')).read()
kv = {}
for ln in unit.splitlines():
    if '=' in ln and not ln.lstrip().startswith('#'):
        k, _, v = ln.partition('=')
        kv.setdefault(k.strip(), []).append(v.strip())
ex = ' '.join(kv.get('ExecStart', [''])).split()
help_text = subprocess.run([B, 'help', 'serve'], capture_output=True, text=True).stdout
unknown = [a for a in ex[2:] if a.startswith('-') and not re.search(r'(^|[\s,])' + re.escape(a) + r'[\s,=]', help_text)]
check(ex[:2] and ex[0].endswith('bitspark') and ex[1] == 'serve' and not unknown,
      'systemd: ExecStart runs bitspark serve with options it knows', str(unknown))
d_unit = float(ex[ex.index('--drain-timeout') + 1]) if '--drain-timeout' in ex else 30
stop = float(re.sub(r's$', '', kv.get('TimeoutStopSec', ['90'])[0]))
check(kv.get('KillSignal') == ['SIGTERM'] and stop > d_unit, f'systemd: SIGTERM, TimeoutStopSec {stop:g} > --drain-timeout {d_unit:g}')
check('--port' in ex and ex[ex.index('--port') + 1] == '%i', 'systemd: the instance name is the port')
finish()
