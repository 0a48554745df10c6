"""The package version: the one place a release changes it (see README, "Release process")."""

VERSION = "0.1.0"
