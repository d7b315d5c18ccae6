# Sphinx configuration of the course site (`make site`; tools/build_site.py stages the pages next to this file).
#
# Why Sphinx + MyST-NB: both are maintained by large communities (Sphinx by the Python docs' own project, MyST-NB by
# Executable Books, behind Jupyter Book), build offline from the committed .ipynb files -- their outputs included,
# with `nb_execution_mode = "off"` no kernel ever runs -- and render the Markdown lesson docs with the same parser.
# MkDocs + mkdocs-jupyter would do too, but converts notebooks through nbconvert per page and MkDocs itself has had
# little upkeep since 2024.
from pathlib import Path

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
# sphinx-book-theme (Executable Books, the theme of Jupyter Book) is made for a course book: the pages in order in
# the sidebar with previous / next links under each, a wide column for code and tables, a button to download a
# notebook's .ipynb (the _sources copy below) or open it in Colab, and a link to the repository.
html_theme = "sphinx_book_theme"
# The one repository URL, from pyproject.toml's [project.urls] (tools/build_site.py stages pyproject.toml here)
try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib
with open(Path(__file__).with_name("pyproject.toml"), "rb") as f:
    REPOSITORY = tomllib.load(f)["project"]["urls"]["Repository"]
html_theme_options = {
    "repository_url": REPOSITORY,
    "repository_branch": "main",
    "path_to_docs": "",  # the staged pages keep their paths in the repository (notebooks/, docs/, exercises/)
    "use_repository_button": True,
    "use_download_button": True,  # the page's source: a notebook's .ipynb, outputs included
    "launch_buttons": {"colab_url": "https://colab.research.google.com", "notebook_interface": "jupyterlab"},
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "navbar_persistent": [],  # the search field is in the sidebar; a second one in a header bar cost 44 px of height
}
# Light until the reader switches (the button above each page): the figures are drawn on white. Unset, the theme
# logs "Got invalid theme mode" to the console on a reader's first page.
html_context = {"default_mode": "light"}
html_title = "gpukernels course"
html_favicon = "favicon.svg"  # a tile of four blocks; without one every page logs a 404 for /favicon.ico
html_static_path = ["_static"]
html_css_files = ["gpukernels.css"]  # a wider content column (site/_static/gpukernels.css says why)
# The download button serves the page's source as it is: 01_matmul.ipynb, not 01_matmul.ipynb.txt
html_copy_source = True
html_sourcelink_suffix = ""
html_show_sourcelink = False
# The classroom pages are copied in as they are, by tools/build_site.py, not parsed by Sphinx.
html_extra_path = ["_extra"]
# Links to files the site does not contain (a kernel.py of an exercise) are written as plain text, not broken links
suppress_warnings = ["myst.xref_missing", "myst.header"]
