#!/usr/bin/env bash
# Release the version in proctor/version.py:
#   1. the changelog's "## Unreleased" section becomes "## vX.Y.Z - YYYY-MM-DD" (a fresh empty
#      "Unreleased" section goes above it);
#   2. CHANGELOG.md and proctor/version.py are committed as "Release vX.Y.Z";
#   3. the annotated tag vX.Y.Z is created and, when an `origin` remote exists, the commit and
#      the tag are pushed; the tag triggers .github/workflows/release.yml, which builds,
#      publishes and writes the GitHub release.
# A failed release: delete the tag (git tag -d vX.Y.Z; git push origin :refs/tags/vX.Y.Z),
# push the fix, and run this script again.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "release: $*" >&2; exit 1; }

version=$(python -c 'import runpy; print(runpy.run_path("proctor/version.py")["VERSION"])') \
    || fail "cannot read VERSION from proctor/version.py"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([a-z0-9.+-]*)$ ]] \
    || fail "VERSION '$version' in proctor/version.py is not a version like 1.2.3"
tag="v$version"

git rev-parse --git-dir >/dev/null 2>&1 || fail "not inside a git repository"
if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
    fail "tag $tag already exists; bump VERSION in proctor/version.py first"
fi
others=$(git status --porcelain --untracked-files=no -- . ':!CHANGELOG.md' ':!proctor/version.py')
[[ -z "$others" ]] || fail "uncommitted changes besides CHANGELOG.md and proctor/version.py:
$others"
grep -q '^## Unreleased$' CHANGELOG.md || fail "CHANGELOG.md has no '## Unreleased' section"
notes=$(awk '/^## Unreleased$/{on=1; next} /^## /{on=0} on' CHANGELOG.md | grep -v '^[[:space:]]*$' || true)
[[ -n "$notes" ]] || fail "the '## Unreleased' section of CHANGELOG.md is empty; say what changed"

today=$(date -u +%Y-%m-%d)
tmp=$(mktemp CHANGELOG.md.XXXXXX)
awk -v head="## $tag - $today" '
    !done && /^## Unreleased$/ { print; print ""; print head; done = 1; next }
    { print }
' CHANGELOG.md >"$tmp"
mv "$tmp" CHANGELOG.md

git add CHANGELOG.md proctor/version.py
git commit -q -m "Release $tag"
git tag -a "$tag" -m "Release $tag"
echo "release: committed and tagged $tag"
if git remote get-url origin >/dev/null 2>&1; then
    git push origin HEAD "$tag"
    echo "release: pushed $tag; the release workflow takes it from here"
else
    echo "release: no 'origin' remote; push the commit and tag yourself: git push origin HEAD $tag"
fi
