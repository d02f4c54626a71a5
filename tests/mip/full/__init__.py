"""Tests that mirror the llmsched package."""
