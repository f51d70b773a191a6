#!/usr/bin/env python3
"""Prints the import graph of the files of one Rust module directory and its cycles.

    python3 scripts/import-graph.py services/owner/src
    python3 scripts/import-graph.py services/frontend/src/worker worker

DIR is a crate's `src` (edges from `crate::x`) or a module directory with a `mod.rs` (edges
from `super::x`, and `crate::<PREFIX>::x` when PREFIX is given; `-> mod` marks a child that
imports its facade back). Test modules (after `#[cfg(test)]`) and comments are ignored.
CODE_STYLE.md's layering rule: the output ends with `CYCLES: []`.
"""
import re,sys,os,glob
root=sys.argv[1]; prefix=sys.argv[2] if len(sys.argv)>2 else None
mods={os.path.basename(f)[:-3]:f for f in glob.glob(root+'/*.rs')}
for f in glob.glob(root+'/*/mod.rs'):
    mods[os.path.basename(os.path.dirname(f))]=f
isdir='mod' in mods
edges={}
for m,f in mods.items():
    src=open(f).read().split('#[cfg(test)]')[0]
    src=re.sub(r'//.*','',src)
    deps=set()
    pats=[r'super::(\w+)', r'super::\{([^}]*)\}'] if isdir else [r'crate::(\w+)', r'crate::\{([^}]*)\}']
    # In a `mod.rs`, `super::x` names the parent's module `x`, not a sibling here.
    if isdir and m=='mod': pats=[]
    if prefix: pats+= [r'crate::'+prefix+r'::(\w+)', r'crate::'+prefix+r'::\{([^}]*)\}']
    for p in pats:
        for grp in re.findall(p,src):
            for x in re.findall(r'(\w+)',grp)[:1] if not p.endswith('\\}') else re.findall(r'(\w+)',grp):
                if x in mods and x!=m: deps.add(x)
                elif isdir and x not in mods and m!='mod' and p.startswith('super'): deps.add('mod')
    if isdir and m=='mod': deps=set(d for d in deps)
    edges[m]=deps
for m in sorted(edges): print(m,'->',' '.join(sorted(edges[m])))
idx={};low={};st=[];on=set();res=[];c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in edges.get(v,()):
        if w not in edges: continue
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        if len(comp)>1: res.append(sorted(comp))
for v in list(edges):
    if v not in idx: sc(v)
print("CYCLES:",res)
