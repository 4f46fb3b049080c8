"""The public data model: types, errors, rejections, limits, payload codecs, checks."""
