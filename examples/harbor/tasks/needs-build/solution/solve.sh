#!/bin/bash
jq --version
