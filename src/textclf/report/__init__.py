"""The report: a small document model rendered to Markdown and HTML, figures, sections."""
