# Sphinx configuration of the course site (`make site`; tools/build_site.py stages the pages next to this file).
#
# Why Sphinx + MyST-NB: both are maintained by large communities (Sphinx by the Python docs' own project, MyST-NB by
# Executable Books, behind Jupyter Book), build offline from the committed .ipynb files -- their outputs included,
# with `nb_execution_mode = "off"` no kernel ever runs -- and render the Markdown lesson docs with the same parser.
# MkDocs + mkdocs-jupyter would do too, but converts notebooks through nbconvert per page and MkDocs itself has had
# little upkeep since 2024.
project = "gpukernels"
author = "gpukernels"
copyright = "gpukernels contributors"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # the notebooks' committed outputs (H200 or simulator runs, each says which) are the page
nb_merge_streams = True
# Markdown outputs (the notebooks' tables, `gpukernels.notebook.Table`) are GitHub-flavoured: with the default
# ("commonmark") every one of them came out as lines of pipes.
nb_render_markdown_format = "gfm"
myst_heading_anchors = 3
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]
html_theme = "alabaster"  # ships with Sphinx: no theme package to install or keep in step
html_theme_options = {"page_width": "1240px", "sidebar_width": "240px", "fixed_sidebar": True}
html_title = "gpukernels course"
html_favicon = "favicon.svg"  # a tile of four blocks; without one every page logs a 404 for /favicon.ico
html_static_path = ["_static"]
html_css_files = ["gpukernels.css"]  # code in sidebar links readable on the narrow layout's dark sidebar
html_copy_source = False  # the site is read, not reassembled: no second copy of every notebook
# The classroom pages (issue 20) are copied in as they are, by tools/build_site.py, not parsed by Sphinx.
html_extra_path = ["_extra"]
# Links to files the site does not contain (a kernel.py of an exercise) are written as plain text, not broken links
suppress_warnings = ["myst.xref_missing", "myst.header"]
