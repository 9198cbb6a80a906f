import json,sys
for f in sys.argv[1:]:
    d=json.load(open(f)); cats=d['categories']
    hm=[]; p99=[]
    for n in ['LowTerm','MedTerm','HighTerm','AndLowLow','AndMedMed','AndHighHigh']:
        l=cats[n]['latencies_us']; hm.append(len(l)/sum(l)*1e6)
    for n in sorted(cats):
        l=sorted(cats[n]['latencies_us']); p99.append(f"{n[:9]}:{l[int(len(l)*0.99)]:.0f}")
    print(f"{f}: hmean {len(hm)/sum(1/x for x in hm):.0f} ingest {d['ingest']['docs_per_sec']:.0f} |", ' '.join(p99))
