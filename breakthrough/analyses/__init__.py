"""What a command asks for, end to end: read the runs or tables, call classify / stats /
signals, and hand the results to `breakthrough.report`'s writers. One module per command;
`report/` only renders (HTML, figures, tables as files, printed text)."""
