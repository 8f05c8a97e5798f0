"""One declared schema per table `bt` writes for users, and the checks that hold writers to it.

Why: a researcher's interface to bt is the tables it leaves behind (they open labels.parquet in
pandas and quote numbers from it), so what each column means, its type, unit and when it is
empty must be written down once and be true of every file. Each table is declared here as a
`columns.Table` (its columns, generated column families such as R_{C}, each with a type, unit,
nullability, one sentence of meaning and its protocol section); writers conform and check a
frame against its declaration before the atomic write (`write`), and docs/outputs.md and
`bt schema` are rendered from the same declarations (`docs`).

    columns.py      the vocabulary: Column, Family, Table, and Field / Document for JSON files
    check.py        conform a frame to its declaration, check it (SchemaError), the arrow
                    schema a parquet file is written with; check a JSON document
    write.py        a checked frame to parquet / CSV, atomically (`outputs.write_atomic`)
    classify.py export.py signals.py study.py uoo.py   the declarations, by command
    registry.py     every declaration by name, in the order docs/outputs.md lists them
    docs.py         docs/outputs.md and `bt schema`'s text, from the declarations
"""
