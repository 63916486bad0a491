#!/bin/bash
sed -i "s/a - b/a + b/" calc/add.py
