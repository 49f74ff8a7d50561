"""Runs one SQL query with DuckDB and prints its rows as JSON (a list of
objects), for crates/cli/tests/cli/export_parquet.rs. Usage: duckdb_query.py
SQL_FILE WORKDIR (the query's relative paths are read from WORKDIR)."""
import json
import os
import sys

import duckdb

sql = open(sys.argv[1]).read()
os.chdir(sys.argv[2])
rel = duckdb.sql(sql)
cols = rel.columns
rows = [dict(zip(cols, r)) for r in rel.fetchall()]
json.dump(rows, sys.stdout, default=lambda v: int(v) if hasattr(v, "__int__") else str(v))
