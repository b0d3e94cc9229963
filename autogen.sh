#!/bin/sh
set -e
cd "$(dirname "$0")"
mkdir -p config/m4
autoreconf -fi
