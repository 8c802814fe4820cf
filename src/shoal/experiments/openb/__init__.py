"""The openb GPU fragmentation experiment (Alibaba cluster-trace-gpu-v2023, FGD, ATC'23).

* `trace`: load the node and pod CSVs of a trace folder (clear errors on bad lines);
* `protocol`: the published static protocol (shuffle, inflate to 130 %, measure);
* `runner`: one run on the real scheduler, sweeps on local cores or a Ray cluster;
* `report`: tables, JSON, curve CSV and SVG plot;
* `replay`: dynamic replay with creation and deletion times;
* `download`: fetch the pinned trace files and check their sha256.
"""
