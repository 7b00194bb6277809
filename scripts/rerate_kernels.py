# rerate.py BUILD JSON OUT: for every task of a `tlm bench kernels` report whose rule schedule under
# BUILD differs from the report's TLM-1 schedule, time Search-1000's schedule against BUILD's rule
# side by side (tlm run --schedule SEARCH --vs RULE, one thread, core 1) and print the ratios.
# rerate.py BUILD JSON OUT PREV: the same after a later rule change, from an earlier OUT (PREV):
# only tasks whose rule schedule differs from the one PREV timed are timed again.
import json, subprocess, sys, re, math, os
build, rep, out = sys.argv[1:4]
d = json.load(open(rep))
prev = {r[0]: r for r in json.load(open(sys.argv[4]))} if len(sys.argv) > 4 else {}
acts = {1: 'relu', 2: 'gelu', 3: 'silu', 4: 'relu6'}
env = dict(os.environ, TLM_CACHE_DIR='none')
def args_of(task):
    if task.startswith('conv:'):
        f = task[5:].split()
        a = [f[0], '--layout', f[1]]
        kv = dict(re.match(r'([a-z]+)(\d+)', x).groups() for x in f[2:])
    else:
        f = task.split()
        a = [f[0]]
        kv = dict(re.match(r'([a-zA-Z]+)(\d+)', x).groups() for x in f[1:])
        if kv.get('tA') == '1': a.append('--transpose-a')
        if kv.get('tB') == '1': a.append('--transpose-b')
    epi = []
    if kv.get('bias') == '1': epi.append('bias')
    if kv.get('bn') == '1': epi.append('bn')
    if kv.get('res') == '1': epi.append('residual')
    if int(kv.get('act', 0)): epi.append(acts[int(kv['act'])])
    if epi: a += ['--epilogue', ','.join(epi)]
    return a
def run(a, extra):
    r = subprocess.run(['taskset', '-c', '1', build + '/tools/tlm', 'run'] + a + ['--threads', '1'] + extra,
                       capture_output=True, text=True, env=env)
    return r.stdout + r.stderr
res = []
for t in d['tasks']:
    if 'searchN' not in t or 'tlm1' not in t: continue
    a = args_of(t['task'])
    o = run(a, ['--schedule', 'rule', '--min-time', '0.01'])
    m = re.search(r'^schedule\s+(.*)$', o, re.M)
    if not m: print('no schedule', t['task'], o[-300:]); continue
    new = m.group(1).strip()
    old_ratio = t['searchN']['median_ns'] / t['tlm1']['median_ns']
    if new == t['tlm1']['schedule']:
        res.append((t['task'], t['family'], old_ratio, old_ratio, 'same')); continue
    p = prev.get(t['task'])
    if p and p[4] == new:  # timed in PREV with this schedule
        res.append(tuple(p)); continue
    srch = t['searchN']['schedule']
    o = run(a, ['--schedule', srch, '--vs', new, '--min-time', '0.5'])
    if 'not in this task' in o:
        # the space's L3 block of M moves with the target's L3 (session 42): where the search's
        # tile_m2 and the rule's both cover all of M, the loops are the same: take the rule's
        M = int(re.match(r'(?:\d+x)*?(\d+)x\d+:', t['task'].split()[0]).group(1)) if ':' in t['task'].split()[0] else 0
        g = lambda k, sch: int(re.search(k + r'=(\d+)', sch).group(1)) if re.search(k + r'=(\d+)', sch) else 0
        m3 = g('tile_m3', srch)
        if M and m3 and M <= g('tile_m2', srch) * m3 and M <= g('tile_m2', new) * m3:
            srch = re.sub(r'tile_m2=\d+', 'tile_m2=%d' % g('tile_m2', new), srch)
            o = run(a, ['--schedule', srch, '--vs', new, '--min-time', '0.5'])
    m = re.search(r'speed A/B\s+([0-9.]+)', o)
    if not m: print('no ratio', t['task'], o[-300:]); continue
    nr = 1 / float(m.group(1))  # search time / rule-15 time
    res.append((t['task'], t['family'], old_ratio, nr, new))
    print(f"{t['task']}: TLM-1/Search-1000 {old_ratio:.3f} -> {nr:.3f}", flush=True)
json.dump(res, open(out, 'w'), indent=0)
g = lambda v: math.exp(sum(map(math.log, v)) / len(v))
print('tasks', len(res), 'changed', sum(r[4] != 'same' for r in res))
print('TLM-1/Search-1000 before', round(g([r[2] for r in res]), 3), 'after', round(g([r[3] for r in res]), 3))
fams = sorted(set(r[1] for r in res))
for f in fams:
    v = [r for r in res if r[1] == f]
    print(f, len(v), round(g([r[2] for r in v]), 3), '->', round(g([r[3] for r in v]), 3))
