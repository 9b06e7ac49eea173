"""Server-rendered pages for technicians and operators (Jinja2; every asset vendored)."""
