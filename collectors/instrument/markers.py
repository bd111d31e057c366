"""When an instrumented interval announces itself to a live reader."""

# An interval gets its open marker (emit_open_marker) only once it has lasted this long. Most
# deadlines and control calls end within milliseconds: a marker for them is a wasted row, and
# when a marker and its span's end reach the store in one commit the writer keeps the marker,
# so the view would show a finished interval as still open.
OPEN_MARKER_AFTER_S = 1.0
