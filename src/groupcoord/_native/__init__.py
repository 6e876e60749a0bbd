"""Compiled hot-path modules (built from native/ and the generated codecs). Import the Python
API in groupcoord.protocol / groupcoord.assign instead of these modules directly."""
