#!/usr/bin/env python3
"""A rule change measured: the rule of an older build (OLD_TLM, a copy of
build/tools/tlm made before the change) against this build's, side by side
(tlm run --vs, A = this build), on every matmul and convolution task of the record files
whose rule schedule changed. One JSON line a changed task in OUT; a summary
(geometric mean, wins and losses beyond 3%) at the end. TLM_ISA applies to
both builds. Time on 2 cores: about 15 minutes over data/records.jsonl.gz
(1,178 matmul tasks), most of it printing the two rules' schedules.

usage: TLM_CACHE_DIR=none [TLM_ISA=avx2] [RULE_AB_ONLY=conv|matmul] [RULE_AB_EVERY=N]
       [RULE_AB_SPEC_ONLY=1] scripts/rule_ab.py OLD_TLM OUT.jsonl RECORDS.jsonl.gz...
"""
import gzip,json,sys,subprocess,re,os,math
ACT={1:'relu',2:'gelu',3:'silu',4:'relu6'}
def args(task):
    c=re.match(r'conv:(\S+) (nchw|nhwc) bias(\d) bn(\d) act(\d) res(\d)$',task)
    if c:
        d,lay,bias,bn,act,res=c.groups()
        ep=[e for e,on in (('bias',bias),('bn',bn)) if on=='1']
        if act!='0':ep.append(ACT[int(act)])
        if res=='1':ep.append('residual')
        return [d,'--layout',lay]+(['--epilogue',','.join(ep)] if ep else [])
    m=re.match(r'(\S+) tA(\d) tB(\d) bias(\d) act(\d) res(\d)$',task)
    if not m: return None
    d,ta,tb,bias,act,res=m.groups()
    a=[d]
    if ta=='1':a.append('--transpose-a')
    if tb=='1':a.append('--transpose-b')
    ep=[]
    if bias=='1':ep.append('bias')
    if act!='0':ep.append(ACT[int(act)])
    if res=='1':ep.append('residual')
    if ep:a+=['--epilogue',','.join(ep)]
    return a
only=os.environ.get('RULE_AB_ONLY')  # 'conv' or 'matmul': one family only
every=int(os.environ.get('RULE_AB_EVERY','1'))  # every Nth task only
spec_only=os.environ.get('RULE_AB_SPEC_ONLY')  # count the changed tasks, time nothing
tasks=[]
seen=set()
for f in sys.argv[3:]:
    for l in gzip.open(f,'rt'):
        r=json.loads(l); t=r['task']
        if t in seen: continue
        seen.add(t)
        if args(t) and (not only or t.startswith('conv:') == (only == 'conv')): tasks.append((t,r.get('family','')))
old_tlm=sys.argv[1]
out=open(sys.argv[2],'w')
def spec(binary,a):
    p=subprocess.run([binary,'run']+a+['--schedule','rule','--min-time','0.001','--threads','2'],capture_output=True,text=True)
    m=re.search(r'^schedule\s+((?:vec|vec_axis)=.*)$',p.stdout,re.M)
    return m.group(1) if m else None
ratios=[]
changed=0
for i,(t,fam) in enumerate(tasks):
    if i % every: continue
    a=args(t)
    o=spec(old_tlm,a); n=spec('build/tools/tlm',a)
    if not o or not n or o==n: continue
    changed+=1
    if spec_only:
        print('changed',t,flush=True); continue
    p=subprocess.run(['build/tools/tlm','run']+a+['--schedule','rule','--vs',o,'--min-time','0.3'],capture_output=True,text=True)
    m=re.search(r'speed A/B\s+([\d.]+) \(min ([\d.]+), max ([\d.]+)',p.stdout)
    if not m: print('ERR',t,p.stderr[-200:],flush=True); continue
    x=float(m.group(1)); ratios.append(x)
    rk='tile_rows' if o.startswith('vec_axis') else 'tile_m3'
    om=re.search(rk+r'=(\d+)',o).group(1); nm=re.search(rk+r'=(\d+)',n).group(1)
    line=json.dumps({'task':t,'family':fam,'old_rows':int(om),'new_rows':int(nm),'speed_new_over_old':x,'min':float(m.group(2)),'max':float(m.group(3)),'old':o,'new':n})
    out.write(line+'\n'); out.flush()
    print(f'{x:.3f} [{m.group(2)}-{m.group(3)}] rows {om}->{nm} {t}',flush=True)
g=math.exp(sum(map(math.log,ratios))/len(ratios)) if ratios else 0
print('tasks',len(tasks[::every]),'changed',changed,'timed',len(ratios),'geomean',round(g,4),'wins>3%',sum(1 for x in ratios if x>1.03),'losses>3%',sum(1 for x in ratios if x<0.97))
