"""Reading a report page back with the standard library's HTML parser."""

from html.parser import HTMLParser


class Page(HTMLParser):
    """Every start tag as (tag, attrs), the text of every <script>, and all the text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        self.text.append(data)

    def all(self, tag: str, cls: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and (cls is None or cls in a.get("class", "").split())]
