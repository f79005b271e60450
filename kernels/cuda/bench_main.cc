int main_placeholder_8019;
