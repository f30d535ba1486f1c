"""The package's version, in a module of its own so that the engine can name it without importing the
package's lazy root."""

__version__ = "0.1.0"
