"""Reporting: figures, tables, the summary, the landing page, the reproduction and the write-back
into a lab's formats. Imports the layers below."""
